"""The engine: plain Python over the models and the store — steps, retries, describe."""
