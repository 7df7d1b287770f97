"""Test helpers shared by every tier (the broker-process fixture lives here)."""
