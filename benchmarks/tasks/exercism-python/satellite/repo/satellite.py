def tree_from_traversals(preorder, inorder):
    pass
