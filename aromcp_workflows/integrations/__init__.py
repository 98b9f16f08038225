"""Glue to agent clients: the prompt texts (`prompts`) and client set-up (`claude`).

Nothing is imported here eagerly, so importing the package costs nothing at server start.
"""
