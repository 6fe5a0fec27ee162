"""One adaptor per cloud SDK, shared by pricing/, provisioner/ and commitments/: the SDK loaded
lazily with one missing-extra error, client settings (retries, timeouts, user agent) in one
place, and the cloud's error codes classified once."""
