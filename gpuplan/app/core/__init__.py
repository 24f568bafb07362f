"""The planning core: the config, the bridge, the models, the tokens and the ports every wing uses."""
