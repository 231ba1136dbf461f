"""What the engines and services export to Prometheus."""
