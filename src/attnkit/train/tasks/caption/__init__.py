"""Image captioning: training and serving (``captioning``), its data (``caption_data``), settings
(``caption_settings``), memory plan (``caption_memory``) and cached encoder features (``feature_cache``)."""
