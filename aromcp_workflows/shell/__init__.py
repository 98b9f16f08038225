"""Server-side shell commands: which shell runs a command (`grammar`, `dialect`), running it
with capped output, a timeout and progress (`runner`), and who owns a running command across
processes and hosts (`owner`).  One concept, one reason to change; the instance layer
(`app/`) calls it, the interpreter only asks for it with a `ShellRequest`."""
