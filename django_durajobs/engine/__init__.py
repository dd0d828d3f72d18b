"""The engine: plain Python over the models — states, steps, retries, redaction, describe."""
