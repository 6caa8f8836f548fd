"""Typed events. The journal format and the wire format are the same bytes."""
