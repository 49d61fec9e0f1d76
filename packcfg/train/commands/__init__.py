"""CLI commands of the train flow (standard-library imports only at module top)."""
