#!/usr/bin/env bash
# Writes the seed corpora tests/fuzz/corpus/<codec>/ for the fuzz_decode_<codec> targets: a few
# small valid inputs per codec (header + payload, layout in fuzz_decode.c). Given a fuzz build
# directory, also corpus/push/ and corpus/message/ for fuzz_push and fuzz_message, written by
# that build's fuzz_gen_corpus (valid requests are packed by protobuf-c and encoded by the
# kernels, so they are made by a program). The output is committed; rerun this after changing
# an input layout. Needs bash, printf, sed and seq.
# Usage: tests/fuzz/make_corpus.sh [BUILD_DIR]
set -euo pipefail
build=${1:+$(cd "$1" && pwd)}
cd "$(dirname "$0")"

hex_to_file() { # hex string -> file
    printf "$(printf '%s' "$1" | sed 's/../\\x&/g')" >"$2"
}

le32() { printf '%02x%02x%02x%02x' $(($1 & 255)) $(($1 >> 8 & 255)) $(($1 >> 16 & 255)) $(($1 >> 24 & 255)); }

rep() { # hex byte(s), count
    printf "$1%.0s" $(seq "$2")
}

# header n flags threshold_bits [ratio_bits sample_bits values indices rounds]
header() {
    printf '%s%02x%s%s%s%02x%02x%02x' "$(le32 "$1")" "$2" "$(le32 "$3")" "$(le32 "${4:-0x3F000000}")" \
        "$(le32 "${5:-0x3F800000}")" "${6:-0}" "${7:-0}" "${8:-10}"
}

T_HALF=0x3F000000 # 0.5
T_QUARTER=0x3E800000 # 0.25
FLAGS_FIT_AVX512_2T=$((1 | 3 << 1 | 8)) # trim to size, AVX-512 cap, two threads
FLAGS_SCALAR=$((1 << 1))

seed() { # codec name hex
    mkdir -p "corpus/$1"
    hex_to_file "$3" "corpus/$1/$2"
}

for codec in none fp16 bf16 2bit 1bit 1bit_scaled topk int8 int4; do rm -rf "corpus/$codec"; done

# Dense payloads stay within -max_len=65536, so their big seeds are one tile (16000 values).
# none: 1.0, -2.5, -0; an empty tensor; 16000 values of 0.5.
seed none small "$(header 3 0 0)0000803f000020c000000080"
seed none empty "$(header 0 0 0)"
seed none big "$(header 16000 $FLAGS_FIT_AVX512_2T 0)$(rep 0000003f 16000)"

# fp16: 1, -2, 65504, 2^-24; 17 halves of 1.5 on the scalar path.
seed fp16 small "$(header 4 0 0)003c00c0ff7b0100"
seed fp16 tail "$(header 17 $FLAGS_SCALAR 0)$(rep 003e 17)"
seed fp16 big "$(header 16000 $FLAGS_FIT_AVX512_2T 0)$(rep 00bc 16000)"

# bf16: 1, -123.5, 2^-133, -0.
seed bf16 small "$(header 4 0 0)803ff7c201000080"
seed bf16 big "$(header 16000 $FLAGS_FIT_AVX512_2T 0)$(rep c03f 16000)"

# 2bit: the golden words of test_codec_golden.c.
seed 2bit golden17 "$(header 17 0 $T_HALF)e38c2c3b80000000"
seed 2bit word16 "$(header 16 $FLAGS_SCALAR $T_QUARTER)1be400ff"
seed 2bit tiles "$(header 40000 $FLAGS_FIT_AVX512_2T $T_HALF)$(rep 1be400ff 2500)"

# 1bit.
seed 1bit golden40 "$(header 40 0 0)8b69ff01aa000000"
seed 1bit word32 "$(header 32 $FLAGS_SCALAR 0)a50f8001"
seed 1bit tiles "$(header 40000 $FLAGS_FIT_AVX512_2T 0)$(rep a50f8001 1250)"

# 1bit_scaled: scale 1.375 + one word; two blocks (scales 0.5 and 3) + 33 words.
seed 1bit_scaled golden8 "$(header 8 0 0)0000b03fab000000"
seed 1bit_scaled blocks "$(header 1025 $FLAGS_SCALAR 0)0000003f00004040$(rep ffffffff 32)00000000"

# int8 / int4 (docs/wire-format.md): blocks of 64, each a scale and its codes padded to 4 bytes.
# The documented 10-element examples; two full blocks and a short one (codes -127/127 and -8,
# which no encoder writes, on the scalar path).
seed int8 golden10 "$(header 10 0 0)040281""3c13f3005ffa19810339d40000"
seed int8 blocks "$(header 130 $FLAGS_SCALAR 0)$(rep 0000003f$(rep 817f 32) 2)00004040""80010000"
seed int4 golden10 "$(header 10 0 0)254992""3ef1501009e3000000"
seed int4 blocks "$(header 129 $FLAGS_SCALAR 0)$(rep 0000003f$(rep 8f7a 16) 2)00004040""08000000"

# topk (docs/wire-format.md): u32 count c, c values (fp32 or fp16), c indices (u32 or LEB128
# deltas). Header args after the threshold: ratio, sample_fraction, value type, index type,
# rounds. n = 100, ratio 0.5: an empty selection, two fp32/int32 pairs; the documented
# n = 10, ratio 0.15 examples in all four encodings; multi-byte varints (200, then 350 as 149).
R_HALF=0x3F000000
R_015=0x3E19999A
ONE=0x3F800000
seed topk empty "$(header 100 0 0 $R_HALF $ONE 0 0 10)00000000"
seed topk pairs "$(header 100 0 0 $R_HALF $ONE 0 0 10)02000000""0000803f000000c0""0300000032000000"
seed topk doc_f32_i32 "$(header 10 0 0 $R_015 $ONE 0 0 10)02000000""000040c000004040""0100000004000000"
seed topk doc_f32_varint "$(header 10 0 0 $R_015 $ONE 0 1 10)02000000""000040c000004040""0102"
seed topk doc_f16_i32 "$(header 10 0 0 $R_015 $ONE 1 0 10)02000000""00c20042""0100000004000000"
seed topk doc_f16_varint "$(header 10 0 0 $R_015 $ONE 1 1 10)02000000""00c20042""0102"
seed topk varint_multibyte "$(header 1000 $FLAGS_SCALAR 0 $R_HALF $ONE 0 1 10)02000000""0000803f0000803f""c8019501"

if [ -n "$build" ]; then
    rm -rf corpus/push corpus/message
    "$build/tests/fuzz/fuzz_gen_corpus" corpus
fi

echo "$(find corpus -type f | wc -l) seeds under $(pwd)/corpus"
