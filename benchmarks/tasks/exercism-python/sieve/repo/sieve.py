def primes(limit):
    pass
