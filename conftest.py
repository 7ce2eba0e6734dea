"""Repository-root conftest: makes the checkout importable and finds the shared data."""
