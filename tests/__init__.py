"""attnkit's tests, by area: core, layers, models, train, data, cli, inspect, integrations, export, viz,
reference, project."""
