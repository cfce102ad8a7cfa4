"""Text data: readers for the common formats, tokenizers, batching, splits and a generated corpus.

Nothing here imports the models: the pipeline hands padded id batches
``{"ids", "lengths", "labels"}`` to whoever trains.
"""

from attnkit.data.batching import (
    LabelVocab,
    TextClassificationDataset,
    bucket_batches,
    collate,
    padding_fraction,
)
from attnkit.data.readers import (
    FORMATS,
    DataFormatError,
    Example,
    guess_format,
    read_examples,
    read_lines,
)
from attnkit.data.splits import kfold, train_val_test_split
from attnkit.data.synthetic import KeywordExample, keyword_corpus
from attnkit.data.tokenization import (
    SPECIAL_TOKENS,
    encode_batch,
    load_tokenizer,
    save_tokenizer,
    train_tokenizer,
)

__all__ = [
    "Example",
    "DataFormatError",
    "FORMATS",
    "read_examples",
    "read_lines",
    "guess_format",
    "SPECIAL_TOKENS",
    "train_tokenizer",
    "save_tokenizer",
    "load_tokenizer",
    "encode_batch",
    "LabelVocab",
    "TextClassificationDataset",
    "collate",
    "bucket_batches",
    "padding_fraction",
    "train_val_test_split",
    "kfold",
    "KeywordExample",
    "keyword_corpus",
]
