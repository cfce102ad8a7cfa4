"""What several test areas share: small data files, models and fakes (fixtures live in conftest.py)."""
