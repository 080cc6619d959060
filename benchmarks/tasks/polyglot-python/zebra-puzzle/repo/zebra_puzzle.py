def drinks_water():
    pass


def owns_zebra():
    pass
