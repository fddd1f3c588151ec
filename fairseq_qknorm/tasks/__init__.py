"""Fairseq tasks of the plugin: ``translation_word_dropout`` (:mod:`.translation_word_dropout`).

Imported by fairseq's ``--user-dir`` loader, which imports every ``<user_dir>/tasks/*.py``.
"""
