"""An example toolgym plugin: the ``count_letter`` tool and the ``letters/CountLetters-v0`` env."""
