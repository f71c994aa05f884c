"""HTTP services: ``toolgym serve SERVICE`` (each module owns its options through ``main(argv) -> int``)."""
