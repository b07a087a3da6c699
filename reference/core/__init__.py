"""What every other package stands on. Errors, environment variables, process settings,
metrics, tensor specs, the artifact metadata schema. Imports nothing else of the reference."""
