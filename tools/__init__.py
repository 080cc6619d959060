"""Tools the model calls: bash, file view/create/edit, search; one registry feeds them all."""
