"""Proxy-task design (Vertex AI NAS's three proxy commands): the pure math they rest on."""
