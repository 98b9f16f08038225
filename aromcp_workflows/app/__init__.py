"""The application layer: the service API and the instance layer that performs effects and commits."""
