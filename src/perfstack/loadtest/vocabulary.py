"""The load test's fixed sets of words, named once for the plan, the client and the records alike.

Standard library only, so that the records below the load test's machinery can name them too.
"""

from __future__ import annotations

from typing import Literal

# How load is applied: a closed loop (a number of streams, each sending its next request when the last
# ends), an open loop (requests sent at a rate, whether or not earlier ones finished), or a replayed trace
# (its own send times, at a speed).
Mode = Literal["concurrency", "rate", "trace"]

# The OpenAI-compatible endpoint driven: chat completions, completions (both streamed), or embeddings.
Api = Literal["chat", "completions", "embeddings"]
