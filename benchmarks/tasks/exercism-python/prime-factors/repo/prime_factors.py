def factors(value):
    pass
