"""The built-in prompt sets (JSONL), installed as package data; see README.md here."""
