"""The project's own errors: the CLI turns each into one line and exit status 2."""


class AffmonError(Exception):
    """Base of every error affmon reports to the user as a one-line message."""


class ParseError(AffmonError, ValueError):
    """A kernel or hwloc text could not be parsed."""


class SourceError(AffmonError):
    """A topology or process source (root tree, XML file, PID) is missing or unusable."""
