"""fairseq tasks of the plugin (imported by fairseq's ``--user-dir`` loader, which imports every
``<user_dir>/tasks/*.py``): ``translation_word_dropout`` (:mod:`.translation_word_dropout`)."""
