def two_fer(name='you'):
    return f'One for {name}, one for me.'
