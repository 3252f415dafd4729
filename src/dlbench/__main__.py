"""Where the ``dlbench`` command starts: ``python -m dlbench`` and the console script
(``dlbench.__main__:main``) both call :func:`main`.

Nothing of dlbench is imported before :func:`main` runs (this module imports ``sys`` alone, and
the package's ``__init__`` nothing), so a Ctrl-C from the first moment dlbench's own code runs,
while the commands' modules load, is one line on stderr and exit 130, never a traceback. (A
Ctrl-C before that lands in the interpreter's own start-up: before Python has installed its
handler the process ends by the signal, which a shell reports as 130 too.)"""

import sys

#: The exit status of an interrupted command (128 + SIGINT), as ``dlbench.commands.common``.
_INTERRUPTED = 130


def main() -> int:
    """Run the command of ``sys.argv``; its exit status."""
    running = False
    try:
        try:
            noted: list[int] = []
            restore = _note_interrupts(noted)
            try:
                from dlbench.cli import main as command  # the commands' modules: a second or so
            finally:
                if restore is not None:
                    restore()
            if noted:  # a Ctrl-C that an import swallowed (a weakref callback's "ignored")
                raise KeyboardInterrupt
            running = True
            return command()
        except KeyboardInterrupt:  # while dlbench loads, or the instant before the command's
            # own handling begins: one line and 130
            return _interrupted("error: interrupted\n" if running
                                else "error: interrupted while dlbench started\n")
    finally:
        # CPython (3.11) ends the process with SIGINT instead of its exit status once a
        # KeyboardInterrupt has left any exec() of a string, even one that dlbench then caught
        # (a Ctrl-C inside a dataclass being made, at import: dataclasses make their methods
        # so). A successful exec() of a string clears that, so an interrupt ends with 130.
        exec("")


def _note_interrupts(noted: list[int]):
    """Python's Ctrl-C, which also notes each one in ``noted``: a KeyboardInterrupt raised
    inside an import can be swallowed there, and the note still ends the command. Returns what
    puts Python's own handler back; None where nothing was changed (not the main thread, or a
    handler that is not Python's: ``nohup``'s ignore, an embedding program's)."""
    import signal
    import threading

    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        return None

    def note(signum, frame):
        noted.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, note)
    return lambda: signal.signal(signal.SIGINT, signal.default_int_handler)


def _interrupted(line: str) -> int:
    try:
        sys.stderr.write(line)
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):  # no stderr, or a closed one
        pass
    return _INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
