"""(room under construction)"""
