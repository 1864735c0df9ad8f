"""The package's exceptions. Their message is one line that starts with the file
or setting at fault, as the toolkit's programs print theirs after
`<program>: error:`."""


class Error(RuntimeError):
    """A problem the user can act on: a file that is missing or damaged, a
    recording that cannot go on."""


class FileError(Error):
    """A file that cannot be read or written, or that breaks its format."""


class UsageError(Error, ValueError):
    """The package used in a way it does not support (wrong model, wrong order of
    calls, a schedule for another model)."""
