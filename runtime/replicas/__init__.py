"""flidec serve --replicas N: data-parallel replicas of one artifact on Ray Serve, behind one endpoint.

routing.py (a request's route: its session, its state's token-prefix block keys), router.py (Ray Serve's
request-router extension: affinity to the replica holding a state, else the least busy), deployment.py
(the Replica deployment, one Program each, and the `serve run` application), service.py (the Service the
single-process app runs over, routing each request to a replica). docs/SERVE.md "Replicas".
"""
