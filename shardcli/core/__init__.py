"""The core: computes and returns frozen results; never prints."""
