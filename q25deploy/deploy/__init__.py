"""Deploying builds to boards over SSH (fabric): atomic releases, verified, rolled back."""
