"""Inference backend: engines (build), models (download), server (launch/reuse/stop), profiles."""
