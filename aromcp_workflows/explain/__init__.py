"""Seeing inside workflows without running them (plan, graph) and instances after
they ran (traces, debug info), with secrets masked everywhere."""
