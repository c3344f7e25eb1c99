"""Domain route modules, one per area of the spec. Each defines ``routes`` (a RouteTable); which
modules the app serves, and in what order, is declared in :mod:`marketplace.http.capabilities`."""
