"""scrun: the OCI runtime front end. One module per runtime command, as in runc and crun."""
