"""Renderers: functions of a Run that only format."""
