"""terraform — see the package modules."""
