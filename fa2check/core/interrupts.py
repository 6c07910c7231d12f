"""SIGTERM as KeyboardInterrupt, once: `timeout` signals the command and then its process
group, so a second SIGTERM would interrupt the first one's handling (an interrupted verify
lost its report to a lock released twice, D72)."""
import signal


def sigterm_as_interrupt() -> None:
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the run is ending: the rest are the same
    raise KeyboardInterrupt
