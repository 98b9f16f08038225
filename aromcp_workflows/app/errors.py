"""The application layer's error: a request it refuses, with what was wrong and what to do."""


class ServiceError(Exception):
    """A request the service refuses; the text says what was wrong and what to do."""
