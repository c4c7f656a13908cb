"""Test doubles and helpers shared by several test packages (never imported by nodeforge/)."""
