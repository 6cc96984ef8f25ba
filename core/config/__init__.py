"""The job request (gpu.yaml merged with arguments) and the user's own config."""
