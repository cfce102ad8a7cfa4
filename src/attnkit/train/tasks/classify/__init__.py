"""Text classification: the pipeline from labelled texts to a run (``pipeline``, ``plan``), the default recipe
(``recipe``), the TF-IDF baseline (``baseline``), what it is trained for (``objective``), BERT fine-tuning
(``finetune``) and the trained classifier served (``predictor``, ``inference``)."""
