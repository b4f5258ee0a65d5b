"""perfstack try: apply each fix to the user's own script and measure it without the profiler."""
