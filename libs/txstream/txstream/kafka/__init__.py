"""Kafka plumbing shared by every component: client configs and topic administration."""
