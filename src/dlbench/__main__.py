import sys

try:
    from dlbench.cli import main
except KeyboardInterrupt:  # Ctrl-C while dlbench itself loads: one line and 130, as any other
    exec("")  # see below
    sys.stderr.write("error: interrupted while dlbench started\n")
    sys.exit(130)

status = main()
# Under `python -m`, CPython (3.11) ends the process with SIGINT instead of its exit code once a
# KeyboardInterrupt has left any exec() of a string, even one that dlbench then caught (a
# Ctrl-C inside a dataclass being made, at import: dataclasses make their methods so). A
# successful exec() of a string clears that, so that an interrupt ends with 130 as documented.
exec("")
sys.exit(status)
