"""The CLI's commands, one module each; ``gpuprov.cli`` registers them."""
