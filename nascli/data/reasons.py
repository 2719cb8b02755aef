"""Short, one-line reasons from library exceptions, for messages that name the file themselves.

Libraries word their errors for programmers: PIL says `cannot identify image file
<_io.BytesIO object at 0x7f...>`, tarfile wraps a decompressor's error, numpy quotes dtypes. The
message a user sees names the file already, so what is kept of the library's words is the reason,
on one line, without any object's repr.
"""

import re

_OBJECT_REPR = re.compile(r"\s*<[^<>\n]*? (?:object|at) (?:at )?0x[0-9a-fA-F]+>")
MAX_LENGTH = 200


def reason(err: BaseException | str) -> str:
  """`err`'s message on one line, object reprs removed, at most MAX_LENGTH characters."""
  text = _OBJECT_REPR.sub("", str(err))
  text = " ".join(text.split()).rstrip(" :")
  if not text:
    text = type(err).__name__ if isinstance(err, BaseException) else "unknown error"
  return text if len(text) <= MAX_LENGTH else text[:MAX_LENGTH - 3] + "..."
