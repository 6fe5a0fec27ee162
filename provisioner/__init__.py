"""provisioner — see the package modules."""
