"""Progress of the coordinator: a one-line bar redrawn in place on a terminal, plain lines
every few epochs otherwise (a log file, CI)."""
from __future__ import annotations

import sys
from typing import Optional, TextIO


class Progress:
    """Shows one training run: start(label), epoch(...) after each epoch, final(...) once."""

    WIDTH = 24

    def __init__(self, epochs: int, stream: Optional[TextIO] = None) -> None:
        self.epochs = epochs
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.every = max(1, epochs // 5)  # plain mode: about five lines per run
        self.label = ""

    def start(self, label: str) -> None:
        self.label = label
        if self.tty:
            self._draw(0, None, None)

    def _line(self, done: int, loss: Optional[float], acc: Optional[float]) -> str:
        fill = self.WIDTH * done // self.epochs
        bar = "#" * fill + "." * (self.WIDTH - fill)
        tail = "" if loss is None else f"  loss {loss:.4f}  test acc {100 * acc:.2f}%"
        return f"{self.label}  [{bar}] epoch {done:>{len(str(self.epochs))}}/{self.epochs}{tail}"

    def _draw(self, done: int, loss: Optional[float], acc: Optional[float]) -> None:
        self.stream.write("\r\033[K" + self._line(done, loss, acc))
        self.stream.flush()

    def epoch(self, epoch: int, loss: float, acc: float) -> None:
        """After 0-based `epoch`: its training loss and test accuracy."""
        done = epoch + 1
        if self.tty:
            self._draw(done, loss, acc)
        elif done % self.every == 0 and done != self.epochs:
            print(self._line(done, loss, acc), file=self.stream, flush=True)

    def final(self, loss: float, acc: float, note: str = "") -> None:
        """The run's last line: its final figures plus note."""
        if self.tty:
            self._draw(self.epochs, loss, acc)
            self.stream.write(f"{note}\n")
        else:
            print(self._line(self.epochs, loss, acc) + note, file=self.stream)
        self.stream.flush()
