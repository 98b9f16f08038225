"""Defences every layer uses: secrets masked in replies, traces, errors and logs (`masking`),
and authors' regular expressions run on RE2 in linear time (`patterns`)."""
