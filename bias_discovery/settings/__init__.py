"""The settings layer: the typed settings of the judge, the statistics' checked values and an
audit's settings, below the logic that reads them.

A settings module imports only the data, model and foundation layers (the import-linter
contract checks it), so reading a config or building the command line's flags never imports
the judge, the stages or numpy. The run's config (`bias_discovery.config`) sits in this layer
too; the operations' options (`bias_discovery.options`) in the foundations.
"""
