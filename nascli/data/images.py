"""Image bytes in and out: lossless PNG encoding of arrays, and strict checks of files."""

import dataclasses
import io
import warnings

import cv2
import numpy as np
from PIL import Image

from nascli.data import reasons

# Formats stored as they are; everything else is re-encoded to PNG (Model Garden decodes both).
# MPO (multi-picture JPEG, common from phone cameras) starts with an ordinary JPEG that every JPEG
# decoder reads, so re-encoding it would only bloat it.
KEPT_FORMATS = {"JPEG": "jpeg", "PNG": "png", "MPO": "jpeg"}


def encode_png(image: np.ndarray) -> bytes:
  """Lossless PNG of an [H,W], [H,W,1] or [H,W,3] RGB uint8 array."""
  image = np.asarray(image, dtype=np.uint8)
  if image.ndim == 3 and image.shape[2] == 3:
    # OpenCV writes BGR order; cvtColor is much faster than encoding a reversed view.
    image = cv2.cvtColor(image, cv2.COLOR_RGB2BGR)
  elif image.ndim == 3 and image.shape[2] == 1:
    image = image[:, :, 0]
  ok, buf = cv2.imencode(".png", image)
  if not ok:
    raise ValueError(f"PNG encoding failed for an array of shape {image.shape}")
  return buf.tobytes()


@dataclasses.dataclass(frozen=True)
class ImageProbe:
  format: str  # PIL's name, e.g. "JPEG"
  height: int
  width: int
  mode: str  # PIL's mode ("RGB", "L", ...); empty when OpenCV did the check


NOT_AN_IMAGE = "not an image file (its bytes match no image format)"
_JPEG_MAGIC = b"\xff\xd8\xff"
# Greyscale output still entropy-decodes the whole stream (so truncation and corruption fail), at
# half the cost of a colour decode; orientation is ignored because TensorFlow ignores it too.
_CV2_CHECK_FLAGS = cv2.IMREAD_GRAYSCALE | cv2.IMREAD_IGNORE_ORIENTATION


def probe(data: bytes) -> ImageProbe:
  """Fully decodes image bytes; raises ValueError with a short reason when they are corrupt."""
  if data[:3] == _JPEG_MAGIC:
    # OpenCV decodes JPEG in C about 4x faster than PIL parses and decodes it; PIL below still
    # gives the reason when OpenCV refuses, and reads the JPEG variants OpenCV cannot.
    pixels = cv2.imdecode(np.frombuffer(data, np.uint8), _CV2_CHECK_FLAGS)
    if pixels is not None:
      return ImageProbe(format="JPEG", height=pixels.shape[0], width=pixels.shape[1], mode="")
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("error", Image.DecompressionBombWarning)
      with Image.open(io.BytesIO(data)) as im:
        im.load()  # Decodes every pixel: a truncated file fails here.
        return ImageProbe(format=im.format or "", height=im.height, width=im.width, mode=im.mode)
  except Image.UnidentifiedImageError:
    # PIL's own words name the in-memory buffer (`<_io.BytesIO object at 0x...>`), not the file.
    raise ValueError(NOT_AN_IMAGE) from None
  except (OSError, SyntaxError, ValueError, Image.DecompressionBombWarning,
          Image.DecompressionBombError) as e:
    raise ValueError(reasons.reason(str(e).splitlines()[0] if str(e) else type(e).__name__)
                     ) from None


def to_storable(data: bytes, checked: ImageProbe | None = None) -> tuple[bytes, str, ImageProbe]:
  """Image bytes as stored in a record: JPEG/PNG as they are, other formats as RGB PNG.

  `checked` is the probe of an earlier check pass over the same bytes: kept formats then need no
  second decode.
  """
  info = checked or probe(data)
  if info.format in KEPT_FORMATS:
    return data, KEPT_FORMATS[info.format], info
  with Image.open(io.BytesIO(data)) as im:
    rgb = np.asarray(im.convert("RGB"))
  return encode_png(rgb), "png", info
