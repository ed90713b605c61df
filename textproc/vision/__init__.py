"""Images for vision-language models, in the tokenizer workers: decode, resize, normalise, patch.

``families`` declares each model family's image processing (one declaration per family, read
from the model's config.json and preprocessor_config.json); ``preprocess`` turns an encoded
image file into the pixel patches and grid the model's processor in transformers makes, and
the number of placeholder tokens vLLM's processor puts in the prompt for it. Pillow and numpy;
no sockets, no processes.
"""

__all__: list[str] = []
