"""HTTP basics shared by minds serve's Tinker routes and the inference surfaces: the errors a request can end in and the bounds a request is held to."""
